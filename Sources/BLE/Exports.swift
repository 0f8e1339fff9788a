// The vocabulary of the facade, re-exported so that `import BLE` is enough to use it.

@_exported import struct HCI.BluetoothAddress
@_exported import struct HCI.AddressType
@_exported import struct HCI.BluetoothUUID
@_exported import struct HCI.HCIStatus
@_exported import struct HCI.ConnectionRole
@_exported import struct HCI.ControllerInfo
@_exported import struct HCI.LEConnectionParameters
@_exported import class HCI.DropCounter
@_exported import struct HCI.BufferedStream
@_exported import protocol HCI.HCITransport
@_exported import struct ATT.ATTErrorCode
@_exported import struct GATT.CharacteristicProperties
@_exported import struct GATT.AttributePermissions
@_exported import enum GATT.GATTType
@_exported import struct GAP.AdvertisingData
@_exported import enum GAP.AdvertisingDataError
@_exported import struct GAP.Advertisement
@_exported import struct GAP.ScanFilter
@_exported import struct GAP.KnownDevice
@_exported import struct GAP.IBeacon
@_exported import enum GAP.Eddystone
@_exported import enum GAP.DistanceEstimate
@_exported import func GAP.firstElement
