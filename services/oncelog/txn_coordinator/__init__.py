"""Transaction coordinator: owns transactional ids, decides commit or abort, and drives markers
(design/architecture.md §5).

The pure domain lives in :mod:`.state` (states and legal transitions), :mod:`.metadata` (per-id
metadata and immutable transitions) and :mod:`.coordinator` (request handling over injected ports).
"""
