"""IQN network, loss, exploration policies and schedules."""
