"""The model server: one engine behind the Anthropic Messages and OpenAI chat-completions protocols."""
