# Wrong: moves the model but never wraps it.
def wrap(model, rank, device):
    return model.to(device)
