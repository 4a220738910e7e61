"""Train-Attention: a meta-learned weight for every token of a document (methods.md, section 1)."""
