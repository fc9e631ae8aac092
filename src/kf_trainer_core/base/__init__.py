"""Pure helpers every layer may use: the errors every layer raises, time, untrusted job
output, marks, extras, the loop offload, a package's lazy names, documents, the
``kf-trainer`` commands printed as hints."""
