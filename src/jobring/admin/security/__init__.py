"""Authentication and authorization for the admin: passwords, sessions, CSRF, API tokens, roles."""
