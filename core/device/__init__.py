"""The device layer: plugin discovery, DEV targets, the Device registry and the Buffer/Allocator/Compiler/Renderer bases.

Nothing is imported here so `import core` and `import core.device.target` stay cheap; import the submodule you need."""
