"""How the server runs threads: the interface (:mod:`.base`) and its two implementations, in process
(:mod:`.inline`) and through the durable run queue (:mod:`.queued`)."""
