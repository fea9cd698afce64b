"""The edge: authentication, routes, and the rendering of errors."""
