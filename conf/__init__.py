"""The Hydra config groups, installed as trackmind.conf so code run without Hydra reads them."""
