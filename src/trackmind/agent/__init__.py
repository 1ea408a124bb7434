"""IQN network, loss, exploration policies and schedules."""

from trackmind.agent.exploration import (
    Exploration,
    PolicyParams,
    build_exploration,
    select_actions,
)
from trackmind.agent.inference import InferenceNetwork, greedy_q, make_inference_network
from trackmind.agent.loss import NonFiniteGuard, iqn_loss
from trackmind.agent.network import IQNNetwork, random_taus, stratified_symmetric_taus
from trackmind.agent.network_config import NetworkConfig, build_network, network_config
from trackmind.schedules import Schedule, schedule_value

__all__ = [
    "Exploration",
    "IQNNetwork",
    "InferenceNetwork",
    "NetworkConfig",
    "NonFiniteGuard",
    "PolicyParams",
    "Schedule",
    "build_exploration",
    "build_network",
    "greedy_q",
    "iqn_loss",
    "make_inference_network",
    "network_config",
    "random_taus",
    "schedule_value",
    "select_actions",
    "stratified_symmetric_taus",
]
