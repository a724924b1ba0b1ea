"""Certificates: a CA and serving/client certificates (pure, `pki`) and their files (`files`)."""
