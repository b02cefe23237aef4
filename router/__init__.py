"""The router: requests, tokenization, the round scheduler, worker clients,
the OpenAI gateway, the offline engine and the command line."""
