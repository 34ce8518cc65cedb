"""Storage helpers shared by services: SQL engines and schema migration."""
