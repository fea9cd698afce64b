"""A token's memory over its whole life: erasing an end user, purging, export and rebuilds."""
