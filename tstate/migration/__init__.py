"""Live migration of bins between workers (Megaphone-style): configurations that change
at timestamps, a planner that turns "from map A to map B" into steps, and the commands
users issue (:class:`Rescale`, :class:`MoveBins`, :class:`Assign`)."""
