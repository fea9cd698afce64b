"""The Context Forge: recalled candidates ranked, filtered and budgeted, with a trace of why
each item was kept or dropped. One module per stage; the stages are pure functions."""
