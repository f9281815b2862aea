"""Shipped model descriptions (TOML) and the package code they name: data builders,
independent references and claims checkers of the papers they reproduce (docs/models.md)."""
