"""Chat completions: forwarding upstream replies and capturing what they said."""
