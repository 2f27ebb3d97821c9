"""rlfactory-nb."""
