"""What a bundle is called, inside and out: read by every `diagnose`, which asks whether its inputs are a bundle
(dsv4ctl.group.detect) without loading the rest of collect."""

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
# The names a bundle has (collect writes .tar.gz, or .tar uncompressed); is_bundle reads only these.
BUNDLE_SUFFIXES = (".tar.gz", ".tgz", ".tar")

__all__ = ["BUNDLE_SUFFIXES", "MANIFEST", "SCHEMA_VERSION"]
