"""The Redis store: the only code that names keys or runs Lua."""
