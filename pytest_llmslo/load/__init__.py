"""load subpackage."""
