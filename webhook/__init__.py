"""The mutating admission webhook: config model, rule matching, patches (pure) and the Flask app."""
