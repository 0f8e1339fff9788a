// Assigned-number names (generated from bluetooth-numbers) and characteristic value
// formatting, against the values the SIG's documents give.

import GATT
import HCI
import Testing

@Suite(.timeLimit(.minutes(3)))
struct AssignedNumbersTests {
    @Test func uuidNamesByRange() {
        #expect(BluetoothUUID(0x180F).name == "Battery Service")
        #expect(BluetoothUUID(0x2A19).name == "Battery Level")
        #expect(BluetoothUUID(0x2902).name == "Client Characteristic Configuration")
        // The SIG's name (Vol 3 Part G §3.3.3.2), not the generator package's "Descriptor".
        #expect(BluetoothUUID(0x2901).name == "Characteristic User Description")
        #expect(BluetoothUUID(0x2800).name == "Primary Service")
        #expect(BluetoothUUID(0x27AD).name == "percentage")
        #expect(BluetoothUUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E")?.name == "Nordic UART Service")
        #expect(BluetoothUUID(0x0001).name == nil)
        #expect(BluetoothUUID("F1DE0000-2C4B-4D5E-8F60-7A8B9CADBEEF")?.name == nil)
    }

    @Test func companiesAndAppearance() {
        #expect(AssignedNumbers.companyName(0x004C) == "Apple, Inc.")
        #expect(AssignedNumbers.companyName(0x00E0) == "Google")
        #expect(CompanyIdentifier.name(0xFFFE).hasPrefix("unknown"), "\(CompanyIdentifier.name(0xFFFE))")
        #expect(AssignedNumbers.appearanceName(0x03C1) == "Human Interface Device: Keyboard")
        #expect(AssignedNumbers.appearanceName(0x00C0) == "Watch")
        #expect(AssignedNumbers.appearanceName(0x00C9) == "Watch (subcategory 9)")
        #expect(AssignedNumbers.appearanceName(0xFFC0) == nil)
    }

    @Test func commonCharacteristicValues() {
        func f(_ uuid: UInt16, _ v: [UInt8]) -> String? { CharacteristicFormatter.describe(v, of: BluetoothUUID(uuid)) }
        #expect(f(0x2A19, [87]) == "87 %")
        #expect(f(0x2A19, [87, 1]) == nil, "a wrong length is not formatted")
        #expect(f(0x2A00, Array("Thermo".utf8)) == "\"Thermo\"")
        #expect(f(0x2A01, [0xC1, 0x03]) == "Human Interface Device: Keyboard")
        // PnP ID: Bluetooth SIG vendor 0x000D (Texas Instruments), product 0x0201, version 0x0110.
        #expect(f(0x2A50, [0x01, 0x0D, 0x00, 0x01, 0x02, 0x10, 0x01]) == "vendor 0x000d (Texas Instruments Inc.) from Bluetooth SIG, product 0x0201, version 0x0110")
        #expect(f(0x2A6E, [0x34, 0x08]) == "21.0 °C")
        #expect(f(0x2A6E, [0x00, 0x80]) == "unknown")
        #expect(f(0x2A37, [0x00, 72]) == "72 bpm")
        #expect(f(0x2A37, [0x01, 0x2C, 0x01]) == "300 bpm")
        #expect(f(0x2A37, [0x01, 0x2C]) == nil)
        #expect(f(0x2902, [0x03, 0x00]) == "notifications and indications")
        #expect(f(0x2A04, [0x06, 0x00, 0x0C, 0x00, 0x00, 0x00, 0xC8, 0x00]) == "interval 7.5 ms–15.0 ms, latency 0, supervision timeout 2000.0 ms")
        #expect(f(0x2A07, [0xF8]) == "-8 dBm")
    }
}
