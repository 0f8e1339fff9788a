# Rootcanal, the controller emulator Android's CI uses (PyPI: rootcanal==1.10.0).
# Hosts connect to its HCI port, 6402 by default; every host gets its own controller.
pip install rootcanal==1.10.0
rootcanal &

swift build
# The peripheral on one controller, the monitor on another, recording its conversation.
.build/debug/battery-daemon peripheral tcp:127.0.0.1:6402 &
.build/debug/battery-daemon monitor tcp:127.0.0.1:6402 \
    --record Tests/BatteryKitTests/Fixtures/rootcanal-battery-monitor.btsnoop
# Battery: 100% then 99%, 98%, 97%

# What was recorded, frame by frame (or open it in Wireshark).
btctl trace show Tests/BatteryKitTests/Fixtures/rootcanal-battery-monitor.btsnoop
