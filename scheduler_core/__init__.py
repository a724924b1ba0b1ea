"""The scheduling core: cluster model, plugins and framework (pure), plus its adapters."""
