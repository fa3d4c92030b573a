// placeholder until the safetensors reader lands
