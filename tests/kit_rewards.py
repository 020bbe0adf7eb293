"""Rewards the adapter test kit gives families whose samples are neither images nor videos (``sample_kind = "array"``,
e.g. a DenoiserPipeline's features), loaded as a user file (``reward.sources``)."""


def feature_mean(samples, prompts, metadata):
    """The mean of every decoded value of a sample: dense, any shape."""
    return samples.detach().float().reshape(len(samples), -1).mean(dim=1).cpu().numpy(), {}
