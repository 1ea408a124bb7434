"""The learning loop: Lightning module, streaming DataModule, collector processes."""
