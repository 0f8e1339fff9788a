// swift-tools-version: 6.0
//
// The package is the layer diagram (docs/architecture.md): a target depends
// only on the layers below it. HCI holds codecs and state machines and does no
// I/O; Transports is the only target that touches file descriptors.
import PackageDescription

// NonisolatedNonsendingByDefault: a nonisolated async function runs on its caller's executor, so the
// stack stays on the controller's loop instead of hopping to the global pool and back
// (which made the order of events across tasks depend on thread timing).
let strict: [SwiftSetting] = [.enableUpcomingFeature("ExistentialAny"), .enableUpcomingFeature("NonisolatedNonsendingByDefault")]

let package = Package(
    name: "swift-ble-host",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "HCI", targets: ["HCI"]),
        .library(name: "Snoop", targets: ["Snoop"]),
        .library(name: "L2CAP", targets: ["L2CAP"]),
        .library(name: "ATT", targets: ["ATT"]),
        .library(name: "GATT", targets: ["GATT"]),
        .library(name: "BlueZATT", targets: ["BlueZATT"]),
        .library(name: "SMP", targets: ["SMP"]),
        .library(name: "GAP", targets: ["GAP"]),
        .library(name: "BLE", targets: ["BLE"]),
        .library(name: "Transports", targets: ["Transports"]),
        .library(name: "BLETesting", targets: ["BLETesting"]),
        .library(name: "VirtualHCI", targets: ["VirtualHCI"]),
        .library(name: "FireAlarm", targets: ["FireAlarm"]),
        .executable(name: "btctl", targets: ["btctl"]),
        .executable(name: "FireAlarmSender", targets: ["FireAlarmSender"]),
        .executable(name: "FireAlarmReceiver", targets: ["FireAlarmReceiver"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
    ],
    targets: [
        .target(name: "CBlueZ"),
        .target(
            name: "HCI",
            dependencies: [
                .product(name: "Logging", package: "swift-log"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: strict),
        .target(name: "Snoop", dependencies: ["HCI", "L2CAP", "ATT", "SMP", .product(name: "NIOCore", package: "swift-nio")], swiftSettings: strict),
        .target(name: "L2CAP", dependencies: ["HCI", .product(name: "Logging", package: "swift-log"), .product(name: "NIOCore", package: "swift-nio"), .product(name: "DequeModule", package: "swift-collections")], swiftSettings: strict),
        .target(name: "ATT", dependencies: ["HCI", "L2CAP", .product(name: "Logging", package: "swift-log"), .product(name: "NIOCore", package: "swift-nio"), .product(name: "DequeModule", package: "swift-collections")], swiftSettings: strict),
        .target(
            name: "BLECrypto",
            dependencies: [.product(name: "Crypto", package: "swift-crypto"), .product(name: "_CryptoExtras", package: "swift-crypto")],
            swiftSettings: strict),
        .target(name: "GATT", dependencies: ["HCI", "L2CAP", "ATT", "BLECrypto", .product(name: "Logging", package: "swift-log"), .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio")], swiftSettings: strict),
        .target(
            name: "SMP",
            dependencies: ["HCI", "L2CAP", "BLECrypto", .product(name: "Logging", package: "swift-log"), .product(name: "NIOCore", package: "swift-nio")],
            swiftSettings: strict),
        .target(
            name: "Transports",
            dependencies: ["HCI", "Snoop", "CBlueZ", .product(name: "Logging", package: "swift-log"), .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio")],
            swiftSettings: strict),
        .target(name: "GAP", dependencies: ["HCI"], swiftSettings: strict),
        .target(
            name: "BLE", dependencies: ["HCI", "L2CAP", "ATT", "GATT", "GAP", "SMP", "Snoop", "Transports", .product(name: "Logging", package: "swift-log"), .product(name: "NIOCore", package: "swift-nio"),
                                      .product(name: "DequeModule", package: "swift-collections")],
            swiftSettings: strict),
        .target(name: "FireAlarm", dependencies: ["BLE", "HCI", "VirtualHCI", .product(name: "Logging", package: "swift-log")], swiftSettings: strict),
        // The in-process radio with software LE controllers: a product (btctl demo and the
        // fire-alarm example run on it), not test support.
        .target(
            name: "VirtualHCI",
            dependencies: ["HCI", "BLECrypto", .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio")],
            swiftSettings: strict),
        .executableTarget(
            name: "FireAlarmSender",
            dependencies: ["BLE", "FireAlarm", .product(name: "ArgumentParser", package: "swift-argument-parser"), .product(name: "Logging", package: "swift-log")],
            path: "Examples/FireAlarmSender", swiftSettings: strict),
        .executableTarget(
            name: "FireAlarmReceiver",
            dependencies: ["BLE", "FireAlarm", .product(name: "ArgumentParser", package: "swift-argument-parser"), .product(name: "Logging", package: "swift-log")],
            path: "Examples/FireAlarmReceiver", swiftSettings: strict),
        .target(name: "BlueZATT", dependencies: ["ATT", "L2CAP", "Transports", "HCI", .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio")], swiftSettings: strict),
        .target(
            name: "BLETesting",
            dependencies: ["HCI", "Snoop", "VirtualHCI", "L2CAP", "ATT", "GATT", "GAP", "SMP", .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio")],
            swiftSettings: strict),
        .executableTarget(
            name: "btctl",
            dependencies: [
                "HCI", "Snoop", "Transports", "L2CAP", "GATT", "GAP", "BLE", "FireAlarm", "SMP", "VirtualHCI",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict),
        .executableTarget(
            name: "DecodeBenchmark", dependencies: ["BenchmarkSupport", "HCI", "Snoop", "SMP"], path: "Benchmarks/DecodeBenchmark",
            swiftSettings: strict),
        .target(name: "BenchmarkSupport", path: "Benchmarks/BenchmarkSupport", swiftSettings: strict),
        .executableTarget(
            name: "GATTBenchmark",
            dependencies: ["BenchmarkSupport", "BLE", "HCI", "Snoop", "L2CAP", "ATT", "GATT", "GAP", "Transports", "BLETesting", .product(name: "Logging", package: "swift-log"), .product(name: "NIOCore", package: "swift-nio"),
                           .product(name: "NIOPosix", package: "swift-nio")],
            path: "Benchmarks/GATTBenchmark", swiftSettings: strict),
        .executableTarget(
            name: "ScanMemoryBenchmark",
            dependencies: ["BenchmarkSupport", "BLE", "GAP", "HCI", "VirtualHCI", .product(name: "Logging", package: "swift-log")],
            path: "Benchmarks/ScanMemoryBenchmark", swiftSettings: strict),
        .executableTarget(
            name: "BondStoreBenchmark", dependencies: ["BenchmarkSupport", "HCI", "SMP"], path: "Benchmarks/BondStoreBenchmark",
            swiftSettings: strict),
        .executableTarget(
            name: "SpeedTestBenchmark",
            dependencies: ["BenchmarkSupport", "BLE", "BLETesting", .product(name: "Logging", package: "swift-log")],
            path: "Benchmarks/SpeedTestBenchmark", swiftSettings: strict),
        .testTarget(
            name: "HCITests",
            dependencies: ["HCI", "BLETesting", .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOEmbedded", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio")],
            swiftSettings: strict),
        .testTarget(name: "SMPTests", dependencies: ["SMP", "BLECrypto", "HCI"], swiftSettings: strict),
        .testTarget(name: "L2CAPTests", dependencies: ["L2CAP", "HCI", "BLETesting", .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOEmbedded", package: "swift-nio")], swiftSettings: strict),
        .testTarget(name: "ATTTests", dependencies: ["ATT", "L2CAP", "HCI", "BLETesting", .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOEmbedded", package: "swift-nio")], swiftSettings: strict),
        .testTarget(
            name: "VirtualRadioTests", dependencies: ["BLETesting", "HCI", "Snoop", "L2CAP", "ATT", "GATT", "SMP",
                                                      .product(name: "NIOEmbedded", package: "swift-nio")], swiftSettings: strict),
        .testTarget(name: "GAPTests", dependencies: ["GAP", "HCI", "BLETesting", .product(name: "Logging", package: "swift-log")], swiftSettings: strict),
        .testTarget(
            name: "BLETests", dependencies: ["BLE", "GAP", "GATT", "HCI", "L2CAP", "BLETesting", "VirtualHCI", "Transports", "Snoop", "FireAlarm", .product(name: "Logging", package: "swift-log"), .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOEmbedded", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio")],
            swiftSettings: strict),
        .testTarget(name: "GATTTests", dependencies: ["GATT", "ATT", "L2CAP", "HCI", "BLETesting", "BLECrypto", .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"), .product(name: "NIOEmbedded", package: "swift-nio"), .product(name: "Logging", package: "swift-log")], swiftSettings: strict),
        .testTarget(name: "SnoopTests", dependencies: ["Snoop", "HCI", "BLETesting"], swiftSettings: strict),
        .testTarget(
            name: "TransportsTests", dependencies: ["Transports", "HCI", "Snoop", "BLETesting", "L2CAP", "ATT", "GATT", "BlueZATT", "SMP", .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio")],
            swiftSettings: strict),
        .testTarget(
            name: "InteropTests", dependencies: ["Transports", "HCI", "Snoop", "BLETesting", "L2CAP", "ATT", "GATT", "GAP", "BLE", "FireAlarm", "SMP"],
            exclude: ["bumble_gatt_central.py", "bumble_gatt_peripheral.py", "bumble_firealarm_receiver.py", "bumble_l2cap_peer.py", "bumble_smp_peer.py", "bumble_eatt_central.py", "bumble_eatt_peripheral.py", "bumble_hostile_central.py", "bumble_hostile_peripheral.py", "bumble_periodic_peer.py", "bumble_phy_peer.py", "bumble_params_central.py", "bumble_longrange_peer.py"],
            swiftSettings: strict),
    ],
    swiftLanguageModes: [.v6]
)
