"""Governance of parameters: proposals, deposits, votes, the tally and the application of passed changes."""
