"""The way from a decoded request to the coordinator: the API table, handlers, steady path, runtime."""
