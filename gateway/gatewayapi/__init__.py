"""The user's own Gateway API gateway as the rollout's data plane: what graystack writes into its routes
(pure builders, like gateway/envoy/), kept apart from the API calls that read and write them."""
