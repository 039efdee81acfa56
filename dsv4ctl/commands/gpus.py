"""`dsv4ctl gpus`: the GPUs vLLM would see here, or a saved snapshot."""

# No `from __future__ import annotations`: Typer reads every command's annotations at start-up (see cli.py).
import typer

SAVE_HINT = "choose another --save path (a file in a directory you can write)"


def gpus_command(
    json_output: bool = typer.Option(
        False, "--json", help="Print the snapshot as JSON: the file format that `fit-length --gpus` reads."
    ),
    save: str | None = typer.Option(
        None, "--save", metavar="PATH", help="Also write the snapshot JSON to PATH (for `dsv4ctl fit-length MODEL --gpus PATH` on another box)."
    ),
    snapshot_path: str | None = typer.Option(
        None, "--snapshot", metavar="PATH", help="Show a saved snapshot instead of asking NVML."
    ),
) -> None:
    """List the GPUs vLLM would see here: memory (NVML and CUDA totals), SM version, processes.

    Honours CUDA_VISIBLE_DEVICES (indices, UUIDs, MIG) as CUDA does. Needs the NVIDIA driver; on a box
    without one, read a snapshot taken elsewhere with --snapshot.

    Exit 0 with the GPUs listed, 1 when none can be read (no driver, an unreadable or invalid snapshot, a --save
    that cannot be written), 2 for bad flags.
    """
    from dsv4ctl.files import check_target
    from dsv4ctl.gpu import load_snapshot, read_snapshot, save_snapshot
    from dsv4ctl.render import emit_json, err_console, out_console, warning_line
    from dsv4ctl.render.gpus import render_gpus

    if save:
        check_target(save, hint=SAVE_HINT)  # before NVML is asked
    snapshot = load_snapshot(snapshot_path) if snapshot_path else read_snapshot()
    if save:
        save_snapshot(snapshot, save, hint=SAVE_HINT)
        err_console().print(f"Saved GPU snapshot to {save}", markup=False)
    if json_output:
        emit_json(snapshot.to_json())
        return
    for note in snapshot.notes:
        warning_line(note)
    render_gpus(snapshot, out_console())
