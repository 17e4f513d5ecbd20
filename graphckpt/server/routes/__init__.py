"""The HTTP routes, one module per resource group (:mod:`.assistants`, :mod:`.threads`, :mod:`.runs`, with the SSE
responses of :mod:`.streams`): each a list of small handlers that parse, call one service method and render."""
