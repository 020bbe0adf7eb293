"""ml-collections experiment configs: ``base.py`` defines every field; other files override it."""
