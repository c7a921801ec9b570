"""Sample applications built on tstate: ``apps.cep`` (complex event processing) and
``apps.graph`` (streaming graph analytics)."""
