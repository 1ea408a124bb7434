"""Experience, the n-step rule, mini-race collate and torchrl replay buffers."""
