"""The event side of the server: the hub that wakes streams (:mod:`.hub`), the ephemeral events of this server's runs
(:mod:`.ephemeral`), the reads of the durable log (:mod:`.log`), how an event looks in each stream mode
(:mod:`.render`), and the SSE stream over them (:mod:`.streams`)."""
