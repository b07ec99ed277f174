"""A worker's start: init(), the store and process group, device and threads; the Context facade."""
