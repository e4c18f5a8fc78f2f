"""File input/output: atomic writes and PLY."""
