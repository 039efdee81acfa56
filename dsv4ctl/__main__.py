from dsv4ctl.cli import main

raise SystemExit(main())
