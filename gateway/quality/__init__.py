"""Answer quality: comparing the candidate's answers with the baseline's (issue 28)."""
