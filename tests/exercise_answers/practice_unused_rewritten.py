# Right: the reference rewritten: the gradients cleared one by one, a loop instead of a
# comprehension, a set turned into a sorted list.
def params_without_grad(model, loss):
    for weight in model.parameters():
        weight.grad = None
    loss.backward()
    missing = set()
    for label, weight in model.named_parameters():
        if weight.grad is None and weight.requires_grad:
            missing.add(label)
    return sorted(missing)
