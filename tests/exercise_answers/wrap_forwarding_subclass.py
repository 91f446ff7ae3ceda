# Right, written differently: a DDP subclass that lets the wrapper answer for the module's
# own attributes (model.hidden_layers instead of model.module.hidden_layers).
import torch.nn.parallel as parallel


class SeeThrough(parallel.DistributedDataParallel):
    def __getattr__(self, attribute):
        try:
            return super().__getattr__(attribute)
        except AttributeError:
            return getattr(self.module, attribute)


def wrap(model, rank, device):
    on_device = model.to(device)
    gpu_ids = [device.index] if device.type == "cuda" else None
    return SeeThrough(on_device, device_ids=gpu_ids)
