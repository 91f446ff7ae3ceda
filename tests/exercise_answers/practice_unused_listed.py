# Wrong: the names written out by hand, as a first run's message once showed them; the
# function never looks at the model or the loss it is given.
def params_without_grad(model, loss):
    return ["aux.bias", "aux.weight"]
