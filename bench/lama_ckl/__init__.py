"""`ckl bench lama-ckl`: the Train-Attention paper's LAMA-ckl protocol on the model we serve.

1. Tailoring: score the base model on every row's `task_descriptive` probe (teacher-forced accuracy
   of the object tokens at the object's last occurrence). TO-LEARN = variant_dev rows scored 0,
   NF = invariant rows scored 1. Scores are cached per model and data file (research/lama_ckl.py).
2. For each method: epoch -1 is the untouched model; each epoch trains once over the TO-LEARN
   evidence in batches, then scores TO-LEARN and NF probes (run.py).
3. Top Acc = best TO-LEARN accuracy over epochs, Epoch = where, NF Acc = NF accuracy there,
   Total Knowledge = Top Acc + NF Acc. Written to results.json, results.md and curves.png (report.py).
4. Where Top Acc comes from: TO-LEARN rows grouped by (relation, answer), and each method's score per
   group at its best epoch. Many rows share an answer, so a method that learns a relation's common
   answer scores on every row that has it (docs/decisions.md: Count learning per (relation, answer)).
5. Methods that weigh with phi: no TO-LEARN row is weighed by a phi meta-trained on it; the run refuses
   such a phi, or with `--crossfit K --split uuid|group` weighs each row with the phi of the fold of
   variant_dev that held it out, trained by `ckl train-attention`'s own function (phis.py).

The training examples, the training loop, the weighted loss and the probe scoring are the service's own
(workers.examples, core.training, core.scoring); only the baselines the service does not
offer live here (rho1.py, full.py).
"""
