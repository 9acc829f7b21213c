"""blockdraft."""
