"""Every answer the gateway measured itself: Envoy's answer filter and access log (gateway/envoy/answer_filter.py,
answer_log.py) report each routed request, the receiver (receiver.py) turns each entry into one `Answer`
(answer.py, entries.py), and a bounded store (store.py) keeps them for the rollout's looks to read."""
