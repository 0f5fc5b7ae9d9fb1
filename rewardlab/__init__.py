"""rewardlab: verifiable rewards, a compact RL loop (GRPO, Dr. GRPO, DAPO, GSPO) and an eval suite."""

__version__ = "0.1.0"
