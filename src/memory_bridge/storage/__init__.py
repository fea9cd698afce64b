"""SQL storage through SQLAlchemy's async engine: SQLite by default, PostgreSQL when outgrown."""
