"""MQTT messaging for every side that talks to the fleet (the device agent, the replayer, the
dashboard's live feed and recorder, local deployments): the paho link (link), how a
connection is secured (security, tls), and the brokers, a Mosquitto process or the embedded
amqtt one (brokers, embedded). What travels over it is `dartfl.protocol`."""
