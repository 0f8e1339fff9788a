// swift-tools-version: 6.0
// A daemon built on swift-ble-host the way an application outside this repository
// builds on it: one dependency line, the `BLE` product for the daemon and
// `BLETesting` for its tests. Its CI replays a session recorded on Rootcanal
// (Tests/BatteryKitTests/Fixtures) — no controller, no radio, no root.

import PackageDescription

let package = Package(
    name: "BatteryDaemon",
    platforms: [.macOS(.v15)],
    dependencies: [
        // Outside this repository: .package(url: "https://github.com/<owner>/swift-ble-host", from: "0.1.0")
        .package(name: "swift-ble-host", path: "../.."),
    ],
    targets: [
        .target(name: "BatteryKit", dependencies: [.product(name: "BLE", package: "swift-ble-host")]),
        .executableTarget(name: "battery-daemon", dependencies: ["BatteryKit", .product(name: "BLE", package: "swift-ble-host"),
                                                                .product(name: "VirtualHCI", package: "swift-ble-host")]),
        .testTarget(name: "BatteryKitTests", dependencies: ["BatteryKit", .product(name: "BLETesting", package: "swift-ble-host")],
                    resources: [.copy("Fixtures")]),
    ]
)
