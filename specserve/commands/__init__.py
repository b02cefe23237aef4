"""The `specserve` subcommands that do more than parse flags: generate, serve
(in one process, disaggregated, or in front of a router)."""
