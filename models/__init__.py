"""The simulated world: the Runtime port on SimPy, its network and disks, and fault schedules."""
