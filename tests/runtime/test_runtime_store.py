"""The model store on its own: checking, loading, validating, staging and rolling back versions exactly as
documented (tests that the mutation check showed were missing)."""
