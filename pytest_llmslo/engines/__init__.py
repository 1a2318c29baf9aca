"""engines subpackage."""
