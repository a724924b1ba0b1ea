"""Certificates, the middle layer (beside webhook; may import scheduler_core only, and needs nothing of it).

A CA and serving/client certificates and the create/reuse/renew/rotate plan (pure: `pki`,
`lifecycle`); writing key pairs (`files`) and `certs ensure` against a Secret and the caBundle
(`ensuring`).
"""
